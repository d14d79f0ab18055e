"""Factorization models learned by the decoupled EKF."""
