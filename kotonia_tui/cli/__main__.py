"""`python -m kotonia_tui.cli`: the `kotonia` command."""

import sys

from kotonia_tui.cli import main

sys.exit(main())
