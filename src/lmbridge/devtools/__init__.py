"""devtools"""
