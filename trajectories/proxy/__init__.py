"""The recording proxy's web side: its views, the caller's body, per-key limits, the
upstream and the recording of each call (docs/proxy.md). The APIs it speaks are pure, in
harness_app/wire/."""
