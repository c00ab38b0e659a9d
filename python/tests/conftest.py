import os
import sys

# This clone's package first (never an older clone's), and the tests' helpers.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
