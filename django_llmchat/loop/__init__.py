"""The agent loop: a run's session, its steps, provider attempts and tool runs, and the
transcript and history each request sends.
"""
