"""`python -m bench.long_runs`: bench.long_runs.main."""

import sys

from bench.long_runs import main

sys.exit(main())
