"""The site's side of graceful draining (seed 003): propagate pilot information into slot ads,
choose cooperative victims, ask them to leave, and a controller that does it automatically."""
