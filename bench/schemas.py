"""JSON schemas of real-world shapes for bench/structured.py, each with the request that asks for
it: nested objects, arrays with bounds, enums, required and optional fields, string formats and
patterns, number ranges. Written for this benchmark (no test set we report on elsewhere)."""


def obj(props, required=None, extra=False):
    """An object schema; every property required unless told, no other properties unless told."""
    schema = {"type": "object", "properties": props,
              "required": list(props) if required is None else required}
    if not extra:
        schema["additionalProperties"] = False
    return schema


def arr(items, lo=None, hi=None):
    schema = {"type": "array", "items": items}
    if lo is not None:
        schema["minItems"] = lo
    if hi is not None:
        schema["maxItems"] = hi
    return schema


def enum(*values):
    return {"enum": list(values)}


S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def s(max_len=None, fmt=None, pattern=None):
    schema = {"type": "string"}
    if max_len:
        schema["maxLength"] = max_len
    if fmt:
        schema["format"] = fmt
    if pattern:
        schema["pattern"] = pattern
    return schema


def i(lo=None, hi=None):
    schema = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    return schema


ADDRESS = obj({"street": s(60), "city": s(40), "postal_code": s(12), "country": s(40)})
MONEY = obj({"amount": N, "currency": enum("USD", "EUR", "GBP", "JPY")})

SCHEMAS = [
    ("user_profile", "Create a user profile for a new customer named Ana Ruiz.",
     obj({"id": i(1), "name": s(40), "email": s(fmt="email"), "age": i(13, 120),
          "newsletter": B})),
    ("postal_address", "Give the postal address of a museum in Madrid.", ADDRESS),
    ("order", "Record an online order of two books and a lamp.",
     obj({"order_id": s(pattern="^ORD-[0-9]{6}$"), "customer": s(40),
          "items": arr(obj({"sku": s(20), "quantity": i(1, 99), "price": N}), 1, 10),
          "status": enum("pending", "paid", "shipped", "delivered")})),
    ("invoice", "Write an invoice from a web agency to a bakery for a new website.",
     obj({"number": s(20), "issued": s(fmt="date"), "seller": s(60), "buyer": s(60),
          "lines": arr(obj({"description": s(80), "hours": N, "rate": N}), 1, 6),
          "total": MONEY})),
    ("product", "Describe a laptop for an online shop's catalogue.",
     obj({"name": s(60), "brand": s(30), "price": MONEY, "in_stock": B,
          "tags": arr(s(20), 0, 5), "rating": {"type": "number", "minimum": 0, "maximum": 5}})),
    ("calendar_event", "Schedule a team retrospective next Friday afternoon.",
     obj({"title": s(60), "start": s(fmt="date-time"), "end": s(fmt="date-time"),
          "location": s(60), "attendees": arr(s(fmt="email"), 1, 8),
          "recurring": enum("none", "daily", "weekly", "monthly")})),
    ("weather_report", "Report today's weather in Oslo.",
     obj({"city": s(40), "temperature_c": N, "humidity": i(0, 100),
          "conditions": enum("sunny", "cloudy", "rain", "snow", "fog", "storm"),
          "wind": obj({"speed_kmh": N, "direction": enum("N", "NE", "E", "SE", "S", "SW", "W",
                                                        "NW")})})),
    ("book", "Catalogue the novel 'Dune' for a library.",
     obj({"title": s(80), "authors": arr(s(40), 1, 3), "year": i(1450, 2030),
          "isbn": s(pattern="^[0-9]{13}$"), "genres": arr(s(20), 1, 4)})),
    ("movie", "Describe the film 'Spirited Away'.",
     obj({"title": s(80), "director": s(40), "year": i(1880, 2030), "runtime_min": i(1, 400),
          "cast": arr(obj({"actor": s(40), "role": s(40)}), 1, 5)})),
    ("recipe", "Give a recipe for pancakes.",
     obj({"name": s(60), "servings": i(1, 20),
          "ingredients": arr(obj({"item": s(40), "amount": s(20)}), 2, 12),
          "steps": arr(s(160), 2, 10), "vegetarian": B})),
    ("flight_booking", "Book a flight from Lisbon to Berlin for one adult.",
     obj({"booking_ref": s(pattern="^[A-Z0-9]{6}$"), "from": s(pattern="^[A-Z]{3}$"),
          "to": s(pattern="^[A-Z]{3}$"), "date": s(fmt="date"),
          "passengers": arr(obj({"name": s(40), "type": enum("adult", "child", "infant")}), 1, 9),
          "cabin": enum("economy", "premium", "business", "first")})),
    ("hotel_reservation", "Reserve two nights in a hotel in Rome.",
     obj({"hotel": s(60), "check_in": s(fmt="date"), "check_out": s(fmt="date"),
          "guests": i(1, 10), "room": enum("single", "double", "suite"),
          "breakfast": B})),
    ("job_posting", "Post a job for a backend engineer.",
     obj({"title": s(60), "company": s(40), "location": s(40), "remote": B,
          "salary": obj({"min": i(0), "max": i(0), "currency": enum("USD", "EUR", "GBP")}),
          "requirements": arr(s(80), 1, 6)})),
    ("resume", "Summarize the resume of an experienced data scientist.",
     obj({"name": s(40), "email": s(fmt="email"), "skills": arr(s(30), 1, 8),
          "experience": arr(obj({"company": s(40), "role": s(40), "years": i(0, 50)}), 1, 4)})),
    ("git_commit", "Describe a commit that fixes a null pointer bug in the parser.",
     obj({"sha": s(pattern="^[0-9a-f]{7,40}$"), "author": s(40), "message": s(100),
          "files_changed": arr(s(80), 1, 5), "insertions": i(0), "deletions": i(0)})),
    ("github_issue", "File a bug report about the app crashing on startup.",
     obj({"title": s(80), "body": s(300), "labels": arr(enum("bug", "enhancement",
                                                                 "question", "crash",
                                                                 "documentation"), 1, 3),
          "priority": enum("low", "medium", "high", "critical")})),
    ("http_log", "Give one access-log record of a failed login request.",
     obj({"timestamp": s(fmt="date-time"), "method": enum("GET", "POST", "PUT", "DELETE"),
          "path": s(80), "status": i(100, 599), "latency_ms": N, "client_ip": s(fmt="ipv4")})),
    ("error_report", "Report a Python exception raised while reading a missing file.",
     obj({"type": s(40), "message": s(120),
          "stack": arr(obj({"file": s(60), "line": i(1), "function": s(40)}), 1, 5),
          "handled": B})),
    ("sensor_reading", "Record a reading from a greenhouse sensor.",
     obj({"sensor_id": s(20), "time": s(fmt="date-time"), "temperature_c": N,
          "humidity": N, "battery": i(0, 100), "ok": B})),
    ("bank_transaction", "Record a card payment at a supermarket.",
     obj({"id": s(30), "date": s(fmt="date"), "amount": MONEY, "merchant": s(40),
          "category": enum("groceries", "transport", "housing", "leisure", "health",
                           "other"),
          "pending": B})),
    ("appointment", "Book a dentist appointment.",
     obj({"patient": s(40), "doctor": s(40), "date": s(fmt="date"),
          "time": s(pattern="^[0-2][0-9]:[0-5][0-9]$"),
          "reason": s(80), "first_visit": B})),
    ("student_grades", "Give the grades of a student in four subjects.",
     obj({"student": s(40), "year": i(1, 13),
          "grades": arr(obj({"subject": s(30), "grade": enum("A", "B", "C", "D", "F")}), 4, 4)})),
    ("football_match", "Report the result of a football match.",
     obj({"home": s(40), "away": s(40), "home_goals": i(0, 20), "away_goals": i(0, 20),
          "scorers": arr(obj({"player": s(40), "minute": i(1, 120)}), 0, 10)})),
    ("restaurant_review", "Review an Italian restaurant.",
     obj({"restaurant": s(60), "stars": i(1, 5), "pros": arr(s(60), 0, 4),
          "cons": arr(s(60), 0, 4), "would_return": B})),
    ("shipping_label", "Create a shipping label for a parcel to Paris.",
     obj({"tracking": s(30), "sender": ADDRESS, "recipient": ADDRESS,
          "weight_kg": N, "service": enum("standard", "express", "overnight")})),
    ("api_config", "Write the configuration of a REST API client.",
     obj({"base_url": s(fmt="uri"), "timeout_s": i(1, 300), "retries": i(0, 10),
          "headers": arr(obj({"name": s(40), "value": s(80)}), 0, 5),
          "auth": enum("none", "basic", "bearer", "oauth2")})),
    ("compose_service", "Describe a web service for a docker compose file.",
     obj({"image": s(60), "ports": arr(s(pattern="^[0-9]{2,5}:[0-9]{2,5}$"), 1, 4),
          "environment": arr(s(60), 0, 6), "restart": enum("no", "always", "on-failure",
                                                          "unless-stopped")})),
    ("pod_spec", "Describe a Kubernetes pod running nginx.",
     obj({"name": s(40), "namespace": s(40),
          "containers": arr(obj({"name": s(40), "image": s(60), "cpu": s(10),
                                 "memory": s(10)}), 1, 3),
          "labels": arr(s(40), 0, 4)})),
    ("feature_flag", "Define a feature flag for a new checkout page.",
     obj({"key": s(pattern="^[a-z][a-z0-9_]{2,39}$"), "enabled": B,
          "rollout_percent": i(0, 100), "owners": arr(s(fmt="email"), 1, 3)})),
    ("survey_response", "Fill in a customer satisfaction survey.",
     obj({"respondent": s(40), "score": i(0, 10), "recommend": B,
          "answers": arr(obj({"question": s(80), "answer": s(120)}), 1, 5)})),
    ("chat_message", "Write a chat message from Sam to the #general channel.",
     obj({"channel": s(30), "author": s(30), "text": s(200), "mentions": arr(s(30), 0, 3),
          "sent_at": s(fmt="date-time")})),
    ("email", "Draft an email inviting a colleague to lunch.",
     obj({"to": arr(s(fmt="email"), 1, 3), "subject": s(80), "body": s(400),
          "importance": enum("low", "normal", "high")})),
    ("meeting_notes", "Take notes of a planning meeting.",
     obj({"title": s(60), "date": s(fmt="date"), "attendees": arr(s(30), 1, 8),
          "decisions": arr(s(120), 0, 5),
          "action_items": arr(obj({"owner": s(30), "task": s(100), "due": s(fmt="date")}), 0, 5)})),
    ("todo_list", "Make a to-do list for moving house.",
     obj({"title": s(60), "items": arr(obj({"task": s(80), "done": B,
                                          "priority": enum("low", "medium", "high")}), 3, 10)})),
    ("shopping_cart", "Show a shopping cart with fruit and milk.",
     obj({"cart_id": s(30), "items": arr(obj({"name": s(40), "qty": i(1, 50), "unit_price": N}),
                                         1, 10),
          "coupon": {"type": ["string", "null"]}})),
    ("payment", "Record a bank transfer paying rent.",
     obj({"payer": s(40), "payee": s(40), "amount": MONEY,
          "method": enum("card", "transfer", "cash", "paypal"), "reference": s(40)})),
    ("subscription", "Describe a streaming service subscription.",
     obj({"plan": enum("basic", "standard", "premium"), "price": MONEY,
          "billing": enum("monthly", "yearly"), "renews_on": s(fmt="date"),
          "auto_renew": B})),
    ("social_post", "Write a social media post announcing a product launch.",
     obj({"author": s(30), "text": s(280), "hashtags": arr(s(pattern="^#[A-Za-z0-9]+$"), 0, 5),
          "visibility": enum("public", "followers", "private")})),
    ("news_article", "Give the metadata of a news article about a solar eclipse.",
     obj({"headline": s(120), "section": enum("world", "science", "sports", "culture",
                                                "business"),
          "published": s(fmt="date-time"), "authors": arr(s(40), 1, 3),
          "keywords": arr(s(30), 1, 6)})),
    ("package_manifest", "Write a package manifest for a small web server library.",
     obj({"name": s(pattern="^[a-z][a-z0-9-]{1,39}$"),
          "version": s(pattern="^[0-9]+\\.[0-9]+\\.[0-9]+$"), "license": s(20),
          "dependencies": arr(obj({"name": s(40), "version": s(20)}), 0, 6)})),
    ("forecast", "Give a three-day weather forecast for Dublin.",
     obj({"city": s(40), "days": arr(obj({"date": s(fmt="date"), "high_c": N, "low_c": N,
                                          "rain_chance": i(0, 100)}), 3, 3)})),
    ("stock_quote", "Give a stock quote for a technology company.",
     obj({"symbol": s(pattern="^[A-Z]{1,5}$"), "price": N, "change_percent": N,
          "volume": i(0), "exchange": enum("NYSE", "NASDAQ", "LSE", "TSE")})),
    ("translation", "Translate 'good morning' into three languages.",
     obj({"source": s(80), "translations": arr(obj({"language": s(20), "text": s(80)}), 3, 3)})),
    ("sentiment", "Classify the sentiment of: 'The update broke everything, again.'",
     obj({"label": enum("positive", "neutral", "negative"),
          "confidence": {"type": "number", "minimum": 0, "maximum": 1}})),
    ("entities", "Extract the people and places from: 'Marie Curie moved from Warsaw to Paris.'",
     obj({"people": arr(s(40), 0, 5), "places": arr(s(40), 0, 5)})),
    ("math_solution", "Solve 3x + 5 = 20 step by step.",
     obj({"steps": arr(s(120), 1, 6), "answer": N})),
    ("function_doc", "Document a Python function that merges two sorted lists.",
     obj({"name": s(40), "parameters": arr(obj({"name": s(30), "type": s(30)}), 1, 4),
          "returns": s(30), "complexity": s(20)})),
    ("unit_conversion", "Convert 5 miles into kilometres.",
     obj({"value": N, "from_unit": s(20), "to_unit": s(20), "result": N})),
    ("itinerary", "Plan a two-day trip to Kyoto.",
     obj({"destination": s(40), "days": arr(obj({"day": i(1, 14),
                                                 "activities": arr(s(80), 1, 4)}), 2, 2)})),
    ("course_syllabus", "Outline an introductory course on databases.",
     obj({"course": s(60), "weeks": i(1, 20),
          "topics": arr(obj({"week": i(1, 20), "topic": s(80)}), 3, 8),
          "level": enum("beginner", "intermediate", "advanced")})),
    ("real_estate", "List a two-bedroom flat for rent.",
     obj({"title": s(80), "bedrooms": i(0, 10), "bathrooms": i(0, 10), "area_m2": N,
          "rent": MONEY, "furnished": B, "address": ADDRESS})),
    ("car_listing", "List a used car for sale.",
     obj({"make": s(30), "model": s(30), "year": i(1950, 2030), "mileage_km": i(0),
          "fuel": enum("petrol", "diesel", "electric", "hybrid"), "price": MONEY})),
    ("library_loan", "Record a library loan of two books.",
     obj({"member": s(40), "books": arr(obj({"title": s(80), "due": s(fmt="date")}), 1, 5),
          "overdue": B})),
    ("optional_fields", "Describe a pet. Include a nickname only if it has one.",
     obj({"name": s(40), "species": enum("dog", "cat", "bird", "fish", "other"),
          "nickname": s(40), "age_years": i(0, 50)}, required=["name", "species"])),
    ("open_object", "Describe a planet with any facts you know.",
     obj({"name": s(40), "moons": i(0, 200)}, extra=True)),
]
