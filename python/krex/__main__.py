# SPDX-License-Identifier: Apache-2.0
"""`python -m krex script.py [args...]`: the same as `python -m krex.run`."""

import sys

from .run import main

sys.exit(main())
