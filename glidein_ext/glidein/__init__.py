"""Inside the glidein: the .pilot.ad / .site.ad handshake (Sfiligoi 2013)."""
