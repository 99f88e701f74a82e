"""The trace-driven simulator: the event loop, its inputs, seed rewards fitted per prompt, and
`spotlight simulate`'s report.
"""
