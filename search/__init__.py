"""Searchers over strategy spaces: grid, MCMC, TPE and Piper's planner."""
