"""The training API, one module per endpoint, each with its input and output serializers
beside its views: `exports.py` (/api/exports/), `sft_jobs.py` (/api/sft-jobs/),
`rl_jobs.py` (/api/rl-jobs/), `rollout_requests.py` (/api/rollout-requests/); `jobs.py` is
what the two job endpoints share."""
