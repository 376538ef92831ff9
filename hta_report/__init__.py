"""hta-report: why is my GPU usage so low?"""
__version__ = "0.1.0"

