from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

admin.site.site_header = "django-llmchat example"
if settings.LLMCHAT["DEFAULT_PROVIDER"] == "demo":
    admin.site.site_header += " · demo mode (offline demo model)"

urlpatterns = [
    path("", views.chat_page, name="chat-page"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("django_llmchat.api.urls")),
]
