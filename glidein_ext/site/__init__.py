"""The site's side of graceful draining (Sfiligoi 2013): propagate pilot information into slot ads,
choose cooperative victims, ask them to leave, and a controller that does it automatically."""
