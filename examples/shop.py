"""shop.py: the model must order what the customer asks for, in the right size, to the right city."""

from typing import Literal

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

STOCK = {"apple": 3, "bread": 0, "cheese": 5, "milk": 2}


class Address(BaseModel):  # a nested argument: a TypedDict in the generated module
    city: str = Field(description="The city to deliver to")
    express: bool = Field(default=False, description="Next-day delivery")


class OrderParams(BaseModel):
    size: Literal["small", "large"] = Field(description="The pack size")  # an enum: a Literal in the module
    item: str = Field(description="What to order")
    ship_to: Address


class StockParams(BaseModel):
    item: str = Field(description="The item to look up")


class Shop(Environment):
    """Order what the customer asks for."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:  # a task is a JSON object: the tools read it as self.task_spec
        cities = ["Oslo", "Lyon"] if split == "train" else ["Porto"]
        return [{"size": s, "item": i, "city": c} for c in cities for i in STOCK for s in ("small", "large")]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Order a {size} {item} to {city}".format(**self.task_spec))]

    @tool
    def stock(self, params: StockParams) -> ToolOutput:
        """How many packs of an item are left."""
        return ToolOutput(blocks=[TextBlock(text=str(STOCK.get(params.item, 0)))])

    @tool
    def order(self, params: OrderParams) -> ToolOutput:
        """Place the order, which ends the episode: reward 1.0 if it is what was asked for, 0.0 otherwise."""
        asked = (self.task_spec["size"], self.task_spec["item"], self.task_spec["city"])
        right = (params.size, params.item, params.ship_to.city) == asked
        return ToolOutput(blocks=[TextBlock(text="ordered" if right else "not what was asked for")],
                          reward=1.0 if right else 0.0, finished=True)
