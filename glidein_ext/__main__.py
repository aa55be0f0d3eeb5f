"""`python -m glidein_ext` is the same as the `glidein-ext` console script."""

from __future__ import annotations

from glidein_ext.entry import main

if __name__ == "__main__":
    main()
