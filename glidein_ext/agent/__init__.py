"""The standalone pilot agent of seed 001 IV: checks, register, pull, run, heartbeat, report."""
