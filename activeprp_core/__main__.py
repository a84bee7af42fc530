"""``python -m activeprp_core``: the ``activeprp`` command line (e.g. ``python -m activeprp_core serve --help``),
an older spelling of the command (the command line lives in ``activeprp_cli``) that scripts still use. A script
the library never imports: the one module of the core that may reach the floor above
(``tests/test_repo_import_hygiene.py``, ``SCRIPTS``)."""

import sys

from activeprp_cli import main

sys.exit(main())
