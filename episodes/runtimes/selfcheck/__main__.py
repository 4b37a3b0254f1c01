"""`python -m episodes.runtimes.selfcheck`: the self-check's command line (`runner`)."""

from __future__ import annotations

import sys

from episodes.runtimes.selfcheck.runner import main

sys.exit(main())
