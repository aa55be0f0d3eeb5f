"""The standalone pilot agent of Hasham 2011 §IV: checks, register, pull, run, heartbeat, report."""
