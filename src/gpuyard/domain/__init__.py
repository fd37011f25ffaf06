"""Pure domain: jobs, states, resources, units and errors. Standard library only."""
