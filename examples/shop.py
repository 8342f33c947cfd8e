"""shop.py: the model must order what the customer asks for (README, "Your own environment")."""

from typing import Literal

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

ITEMS = {"apple": 3, "bread": 0, "cheese": 5, "milk": 2}  # what the shop has, and how many


class Address(BaseModel):
    city: str = Field(description="The city to deliver to")
    express: bool = Field(default=False, description="Next-day delivery")


class OrderParams(BaseModel):
    size: Literal["small", "large"] = Field(description="The pack size")
    item: str = Field(description="What to order")
    ship_to: Address


class StockParams(BaseModel):
    item: str = Field(description="The item to look up")


class Shop(Environment):
    """Order the item, in the size and to the city the customer asks for."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        cities = ["Oslo", "Lyon"] if split == "train" else ["Porto"]
        return [{"item": i, "size": s, "city": c} for c in cities for i in ITEMS for s in ("small", "large")]

    def get_prompt(self) -> list[TextBlock]:
        task = self.task_spec
        return [TextBlock(text=f"Order a {task['size']} {task['item']} to {task['city']}")]

    @tool
    def stock(self, params: StockParams) -> ToolOutput:
        """How many packs of an item are left."""
        return ToolOutput(blocks=[TextBlock(text=str(ITEMS.get(params.item, 0)))])

    @tool
    def order(self, params: OrderParams) -> ToolOutput:
        """Place the order, which ends the episode: reward 1.0 if it is what was asked for, 0.0 otherwise."""
        task = self.task_spec
        right = (params.item, params.size, params.ship_to.city) == (task["item"], task["size"], task["city"])
        return ToolOutput(blocks=[TextBlock(text="ordered" if right else "not what was asked for")],
                          reward=1.0 if right else 0.0, finished=True)
