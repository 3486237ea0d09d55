"""What a chat store does with stored chats: branches, forks, shares, tags, titles, search,
export and import, retention and erasure, the dashboard.
"""
