from rest_framework.pagination import CursorPagination


class IdCursorPagination(CursorPagination):
    """Cursor pagination on the primary key: constant cost at any depth, no COUNT(*)."""

    ordering = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000
