"""The database beneath the loop: the fenced SQL of the reply's hot path and connections
across long waits.
"""
