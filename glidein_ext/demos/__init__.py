"""The demo's scenes (``glidein-ext demo``): ``system`` (the whole system, the default),
``handshake`` (Sfiligoi 2013's drain in the real pool), ``site`` (glideins as a site and a VO run
them); ``local_site`` runs a Task Queue and a site of pilots as local processes."""
