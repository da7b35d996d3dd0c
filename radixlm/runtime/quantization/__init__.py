"""Serving quantized weights: choosing a method (``--quantization``) and swapping layers after load."""
