"""The abstract interfaces of each level, which plugins implement.

Importing this package imports no framework: numpy arrays are the exchange format.
"""
