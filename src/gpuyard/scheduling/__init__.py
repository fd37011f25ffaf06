"""Pure scheduling: the cluster model, the Policy protocol and the policies, projections.

No I/O here: the server's controller and the simulator call the same code.
"""
