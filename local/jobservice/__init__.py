"""A local stand-in for the Vertex AI JobService: the real gRPC API on the real proto types, with jobs
run as local process groups that get the Vertex environment. See server.py for the pieces and
__main__.py for the command line. Kept free of imports so the node agent starts fast."""
