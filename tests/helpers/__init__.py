"""What several test modules share; on the path through pytest's ``pythonpath`` (pyproject)."""
