"""Housekeeping of what mur leaves on disk: old sessions and unused compiled components (`mur gc`)."""
