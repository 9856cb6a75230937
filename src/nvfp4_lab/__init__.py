"""nvfp4-lab: emulated NVFP4 / MXFP4 / FP8 training and the ablations of the NVFP4 paper."""

__version__ = "0.1.0"
