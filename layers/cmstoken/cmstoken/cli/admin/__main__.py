"""``python -m cmstoken.cli.admin``: the same as ``cmstoken-admin``."""

import sys

from cmstoken.cli.admin.command import main

sys.exit(main())
