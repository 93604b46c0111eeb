"""`make report` under its old name: `python -m pyserini_ext.repro` (the reproduction harness; see its --help)."""
import sys

from pyserini_ext.repro.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
