"""`python -m glidein_ext` is the same as the `glidein-ext` console script."""

from glidein_ext.entry import main

if __name__ == "__main__":
    main()
