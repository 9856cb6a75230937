"""What the analysis reads: the lab's runs as tables (``collect``), each run's machine
class (``machines``), whether runs can share a report (``comparable``), and the paper's
numbers (``paper``)."""
