"""The helpers every other folder uses: stdlib only, no model, no table library at import.

May import: nothing of oodcorr outside this folder.
"""
