"""`python -m harness_app.harness`: see cli.py for the commands."""

from harness_app.harness.cli import main

raise SystemExit(main())
