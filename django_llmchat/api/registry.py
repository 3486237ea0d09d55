"""``models/``: the model registry, read only."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter
from rest_framework import viewsets

from ..models import LLMModel
from .base import LLMChatView
from .filters import CAPABILITY_PATTERN, LLMModelFilter
from .pagination import ModelPagination
from .responses import ERROR
from .schema import document
from .serializers import LLMModelSerializer

__all__ = ["LLMModelViewSet"]


class LLMModelViewSet(LLMChatView, viewsets.ReadOnlyModelViewSet):
    """The model registry: limits, modalities, capabilities and prices."""

    queryset = LLMModel.objects.all().order_by("provider", "model_id")
    serializer_class = LLMModelSerializer
    pagination_class = ModelPagination
    filter_backends = [DjangoFilterBackend]
    filterset_class = LLMModelFilter

    @document(
        summary="List the model registry",
        parameters=[
            OpenApiParameter(
                "capability",
                str,
                description="A capability the model has (tools, vision, streaming...); "
                "repeat the parameter to require several.",
                pattern=CAPABILITY_PATTERN,
            ),
            # Django refuses a NUL in a query's text filter: the schema says so
            *(
                OpenApiParameter(name, str, description=text, pattern=r"^[^\x00]*$")
                for name, text in (
                    ("provider", "Provider name."),
                    ("family", "Model family."),
                    ("search", "Part of the model id or name (case-insensitive)."),
                )
            ),
        ],
        responses={200: LLMModelSerializer(many=True), 400: ERROR},
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @document(summary="Read one model", responses={200: LLMModelSerializer, 404: ERROR})
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)
