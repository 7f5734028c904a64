"""Shared foundations: units and bandwidth, parallel layout, rank groups, errors, CLI flags."""
