"""``python -m covonaut_es``: the covonaut-es command line."""

from covonaut_es.cli import main

raise SystemExit(main())
