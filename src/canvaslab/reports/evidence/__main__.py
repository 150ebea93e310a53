"""``python -m canvaslab.reports.evidence``."""

import sys

from canvaslab.reports.evidence import main

sys.exit(main())
