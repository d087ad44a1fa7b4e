"""Routes: admin (to be implemented)."""

from fastapi import APIRouter

router = APIRouter()
