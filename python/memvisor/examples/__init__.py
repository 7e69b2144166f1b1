"""Example policies written in Python (`memvisor.Policy`)."""
