"""Real pydantic models, written the way people write them, for the structured-output table:
`Field(ge, le, gt, lt, multiple_of)`, `constr(pattern, min_length, max_length)`, `EmailStr`,
`datetime`, `date`, `UUID`, `conlist(min_length, max_length)`, `Literal`, optional fields,
nested models and lists of models. Each comes with a prompt; none is bent to suit a decoder."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Literal

from pydantic import BaseModel, EmailStr, Field, conlist, constr

__all__ = ["MODEL_CASES", "ModelCase"]


class Person(BaseModel):  # the issue's own example
    name: str = Field(min_length=1, max_length=40)
    age: int = Field(ge=0, le=130)
    email: EmailStr
    code: str = Field(pattern=r"^[A-Z]{3}-[0-9]{2}$")


class Temperature(BaseModel):
    celsius: float = Field(ge=-90, le=60)
    city: str = Field(max_length=24)


class Score(BaseModel):
    value: int = Field(gt=0, lt=10)


class Percent(BaseModel):
    share: float = Field(ge=0, le=100)
    label: Literal["done", "left"]


class EvenNumber(BaseModel):
    n: int = Field(multiple_of=2, ge=0, le=100)


class Dozen(BaseModel):
    eggs: int = Field(multiple_of=12)


class Price(BaseModel):
    amount: float = Field(gt=0, lt=10000)
    currency: Literal["USD", "EUR", "GBP"]


class Rating(BaseModel):
    stars: int = Field(ge=1, le=5)
    comment: constr(max_length=60)  # type: ignore[valid-type]


class ZipCode(BaseModel):
    zip: constr(pattern=r"^[0-9]{5}$")  # type: ignore[valid-type]


class Colour(BaseModel):
    hex: str = Field(pattern=r"^#[0-9a-fA-F]{6}$")
    name: str = Field(min_length=3, max_length=20)


class Username(BaseModel):
    handle: constr(pattern=r"^[a-z][a-z0-9_]{2,15}$")  # type: ignore[valid-type]


class Phone(BaseModel):
    number: str = Field(pattern=r"^\+?[0-9]{7,12}$")
    kind: Literal["mobile", "home", "work"]


class Contact(BaseModel):
    name: constr(min_length=2, max_length=30)  # type: ignore[valid-type]
    email: EmailStr


class Event(BaseModel):
    title: str = Field(max_length=40)
    starts: datetime.datetime


class Birthday(BaseModel):
    name: str = Field(max_length=30)
    day: datetime.date


class Ticket(BaseModel):
    id: uuid.UUID
    priority: Literal["low", "medium", "high"]


class Tagged(BaseModel):
    tags: conlist(constr(min_length=1, max_length=12), min_length=1, max_length=4)  # type: ignore[valid-type]


class Scores(BaseModel):
    values: conlist(int, min_length=2, max_length=5)  # type: ignore[valid-type]


class Grid(BaseModel):
    rows: conlist(conlist(int, min_length=2, max_length=2), min_length=2, max_length=2)  # type: ignore[valid-type]


class Status(BaseModel):
    state: Literal["open", "closed", "pending"]
    note: constr(max_length=30) | None = None  # type: ignore[valid-type]


class Profile(BaseModel):
    nickname: str | None = Field(default=None, max_length=20)
    age: int | None = Field(default=None, ge=0, le=120)


class Address(BaseModel):
    street: str = Field(max_length=40)
    city: str = Field(max_length=30)
    zip: str = Field(pattern=r"^[0-9]{5}$")


class Customer(BaseModel):
    name: str = Field(max_length=30)
    address: Address


class Item(BaseModel):
    name: str = Field(max_length=20)
    qty: int = Field(ge=1, le=9)
    price: float = Field(gt=0, le=1000)


class Order(BaseModel):
    id: uuid.UUID
    items: conlist(Item, min_length=1, max_length=3)  # type: ignore[valid-type]


class Member(BaseModel):
    name: str = Field(min_length=1, max_length=20)
    role: Literal["lead", "dev", "qa"]


class Team(BaseModel):
    members: list[Member] = Field(max_length=3)


class Meeting(BaseModel):
    room: str = Field(pattern=r"^R[0-9]{3}$")
    start: datetime.datetime
    end: datetime.datetime


class Flight(BaseModel):
    code: str = Field(pattern=r"^[A-Z]{2}[0-9]{3,4}$")
    departs: datetime.date
    seats: int = Field(ge=1, le=400)


class Coordinates(BaseModel):
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)


class Version(BaseModel):
    major: int = Field(ge=0, lt=100)
    minor: int = Field(ge=0, lt=100)
    patch: int = Field(ge=0, lt=1000)


class Stock(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{2}-[0-9]{4}$")
    count: int = Field(ge=0, multiple_of=5)


class Review(BaseModel):
    rating: Literal[1, 2, 3, 4, 5]
    text: str = Field(min_length=5, max_length=80)
    reviewer: EmailStr | None = None


class Book(BaseModel):
    title: str = Field(max_length=40)
    isbn: str = Field(pattern=r"^[0-9]{13}$")
    published: datetime.date


class Shelf(BaseModel):
    books: conlist(Book, min_length=1, max_length=2)  # type: ignore[valid-type]


class Survey(BaseModel):
    respondent: uuid.UUID
    answers: conlist(Literal["yes", "no"], min_length=3, max_length=3)  # type: ignore[valid-type]


class Host(BaseModel):
    ip: IPv4Address
    port: int = Field(ge=1, le=65535)


class Invoice(BaseModel):
    kind: Literal["invoice"]  # a tag, as in a discriminated union
    total: float = Field(ge=0, le=100000)
    due: datetime.date


@dataclass(frozen=True)
class ModelCase:
    id: str
    model: type[BaseModel]
    prompt: str
    max_tokens: int = 100_000  # no budget is sure to hold its longest reply: each may end on its own or be cut


def _case(model: type[BaseModel], prompt: str) -> ModelCase:
    return ModelCase(model.__name__, model, prompt)


MODEL_CASES: tuple[ModelCase, ...] = (
    _case(Person, "Describe a person: name, age, email and an access code."),
    _case(Temperature, "What is the temperature in a city today?"),
    _case(Score, "Give a score from 1 to 9."),
    _case(Percent, "How much of the work is done, in percent?"),
    _case(EvenNumber, "Pick an even number."),
    _case(Dozen, "How many eggs, in dozens?"),
    _case(Price, "How much does a bicycle cost?"),
    _case(Rating, "Rate a film you liked."),
    _case(ZipCode, "Give a US zip code."),
    _case(Colour, "Name a colour and its hex code."),
    _case(Username, "Suggest a username."),
    _case(Phone, "Give a phone number."),
    _case(Contact, "Give a contact's name and email."),
    _case(Event, "When does the concert start?"),
    _case(Birthday, "Whose birthday is it, and when?"),
    _case(Ticket, "Open a support ticket."),
    _case(Tagged, "Tag a photo of a beach."),
    _case(Scores, "List a few test scores."),
    _case(Grid, "Write a two by two grid of numbers."),
    _case(Status, "What is the status of the order?"),
    _case(Profile, "Fill in a user profile."),
    _case(Customer, "Give a customer's name and address."),
    _case(Order, "Write an order for some groceries."),
    _case(Team, "Who is on the team?"),
    _case(Meeting, "Book a meeting room for tomorrow morning."),
    _case(Flight, "Describe a flight."),
    _case(Coordinates, "Where is Paris on the map?"),
    _case(Version, "What version is the software?"),
    _case(Stock, "How many of an item are in stock?"),
    _case(Review, "Review a restaurant."),
    _case(Shelf, "Which books are on the shelf?"),
    _case(Survey, "Answer three yes-or-no questions."),
    _case(Host, "Which server should we connect to?"),
    _case(Invoice, "Write an invoice for a repair."),
)
