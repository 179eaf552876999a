"""The discrete-event simulation (the only package that imports simpy) and Eq. 7.

Importing :mod:`sim` is cheap: the SimPy engine is imported by the modules that
run a simulation, so ``trainsim predict`` does not pay for it.
"""
