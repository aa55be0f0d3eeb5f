"""The Task Queue's client library: what pilots import (runs on the worker nodes' Python 3.9)."""
