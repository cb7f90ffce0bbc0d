"""The power of a design by simulation (``oodcorr design``): engine, item noise, pilot, report."""
