"""``python -m activeprp_core``: the ``activeprp`` command line (e.g. ``python -m activeprp_core serve --help``),
the spelling it had before it moved out of the core into ``activeprp_cli`` (c9c478a), kept so that scripts using
it keep working. A script the library never imports: the one module of the core that may reach the floor above
(``tests/test_import_hygiene.py``, ``SCRIPTS``)."""

import sys

from activeprp_cli import main

sys.exit(main())
