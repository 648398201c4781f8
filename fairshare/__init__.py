"""Queues and fair sharing: ResourceFlavors, flavor-weighted DRS (KEP-8902), KAI fair share.

Pure: quota trees and usage in, shares and admission/preemption decisions out. No I/O.
"""
