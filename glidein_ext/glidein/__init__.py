"""Inside the glidein: the .pilot.ad / .site.ad handshake (seed 003)."""
