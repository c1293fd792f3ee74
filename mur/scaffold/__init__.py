"""`mur new tool|capsule|agent NAME`: starter projects that build and run offline (mur/scaffold/new.py)."""
