"""``python -m cmstoken.cli.get_token``: the same as ``get-token``."""

import sys

from cmstoken.cli.get_token.command import main

sys.exit(main())
