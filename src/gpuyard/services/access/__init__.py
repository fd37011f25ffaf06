"""access"""
