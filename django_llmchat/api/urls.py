"""``path("api/", include("django_llmchat.api.urls"))`` mounts the API (namespace
``llmchat-api``)."""

from django.apps import apps
from django.urls import path, re_path, register_converter

from .chats import ChatViewSet, RunViewSet
from .errors import not_found
from .feedback import FeedbackView
from .ids import CallIdConverter, ClientIdConverter
from .messages import MessageListCreateView, ToolCallDecisionView
from .registry import LLMModelViewSet
from .schema_views import SchemaRedocView, SchemaSwaggerView, SchemaView
from .shares import ForkView, SharedView, ShareView
from .tokens import TokenView
from .ui.views import UIChatMessagesView, UIChatStopView, UIChatStreamView, UIChatView

app_name = "llmchat-api"

# string ids no row can have match no route: the JSON 404 below, before any query
register_converter(CallIdConverter, "llmchat_call_id")
register_converter(ClientIdConverter, "llmchat_client_id")

chat_list = ChatViewSet.as_view({"get": "list", "post": "create"})
chat_detail = ChatViewSet.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
)

urlpatterns = [
    path("chats/", chat_list, name="chat-list"),
    path("chats/<int:pk>/", chat_detail, name="chat-detail"),
    path("chats/<int:pk>/messages/", MessageListCreateView.as_view(), name="chat-messages"),
    path(
        "chats/<int:pk>/messages/<int:message_id>/feedback/",
        FeedbackView.as_view(),
        name="message-feedback",
    ),
    path("chats/<int:pk>/events/", ChatViewSet.as_view({"get": "events"}), name="chat-events"),
    path("chats/<int:pk>/cancel/", ChatViewSet.as_view({"post": "cancel"}), name="chat-cancel"),
    path("chats/<int:pk>/switch/", ChatViewSet.as_view({"post": "switch"}), name="chat-switch"),
    path("chats/<int:pk>/usage/", ChatViewSet.as_view({"get": "usage"}), name="chat-usage"),
    path("chats/<int:pk>/fork/", ForkView.as_view(), name="chat-fork"),
    path("chats/<int:pk>/share/", ShareView.as_view(), name="chat-share"),
    path("shared/<str:token>/", SharedView.as_view(), name="shared"),
    path("chats/<int:pk>/runs/", RunViewSet.as_view({"get": "list"}), name="chat-runs"),
    path("runs/<int:pk>/", RunViewSet.as_view({"get": "retrieve"}), name="run-detail"),
    path(
        "chats/<int:pk>/tool-calls/<llmchat_call_id:call_id>/approve/",
        ToolCallDecisionView.as_view(decision="approved"),
        name="tool-call-approve",
    ),
    path(
        "chats/<int:pk>/tool-calls/<llmchat_call_id:call_id>/deny/",
        ToolCallDecisionView.as_view(decision="denied"),
        name="tool-call-deny",
    ),
    path("ui/chat", UIChatView.as_view(), name="ui-chat"),
    path(
        "ui/chat/<llmchat_client_id:id>/stream", UIChatStreamView.as_view(), name="ui-chat-stream"
    ),
    path(
        "ui/chat/<llmchat_client_id:id>/messages",
        UIChatMessagesView.as_view(),
        name="ui-chat-messages",
    ),
    path("ui/chat/<llmchat_client_id:id>/stop", UIChatStopView.as_view(), name="ui-chat-stop"),
    path("models/", LLMModelViewSet.as_view({"get": "list"}), name="model-list"),
    path("models/<int:pk>/", LLMModelViewSet.as_view({"get": "retrieve"}), name="model-detail"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SchemaSwaggerView.as_view(), name="schema-docs"),
    path("redoc/", SchemaRedocView.as_view(), name="schema-redoc"),
]

if apps.is_installed("rest_framework.authtoken"):
    urlpatterns.append(path("auth/token/", TokenView.as_view(), name="token"))

# last: any other path under the API is a JSON 404 (not the project's HTML page), line
# breaks in it too ("." stops at a newline)
urlpatterns.append(re_path(r"^(?P<path>[\s\S]*)$", not_found, name="not-found"))
