"""glidein-ext: an HTCondor/glideinWMS plugin and pilot wrapper.

Nothing happens at import: every module only defines names.
"""

__version__ = "0.1.0"
