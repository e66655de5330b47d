"""Prompt sets: templated chat prompts for training the draft, and hand-written held-out prompts for measuring.

The two never meet: training prompts come from the templates below, the measurement prompts were written
separately after the draft was trained, and a test checks that none of them is in the training set.
"""
from __future__ import annotations

import random

TOPICS = [
    "photosynthesis", "black holes", "the French Revolution", "machine learning", "climate change",
    "the water cycle", "volcanoes", "the human heart", "electric cars", "the stock market", "vaccines",
    "the Roman Empire", "quantum computing", "honey bees", "the internet", "solar panels", "coffee",
    "the Moon", "earthquakes", "recycling", "chess", "the piano", "democracy", "inflation", "sleep",
    "meditation", "dinosaurs", "the Great Wall of China", "rainbows", "tides", "gravity", "DNA",
    "the immune system", "bread baking", "gardening", "marathon training", "time management",
    "public speaking", "the printing press", "ancient Egypt", "the Amazon rainforest", "coral reefs",
    "penguins", "wolves", "the Olympic Games", "jazz music", "renewable energy", "nuclear power",
    "smartphones", "social media", "cybersecurity", "password safety", "budgeting", "saving money",
    "learning a language", "healthy breakfast", "drinking water", "the solar system", "Mars",
    "the speed of light", "magnets", "batteries", "bicycles", "airplanes", "trains", "bridges",
    "skyscrapers", "the Renaissance", "Shakespeare", "poetry", "photography", "painting", "origami",
    "friendship", "teamwork", "leadership", "job interviews", "writing a resume", "remote work",
    "online learning", "libraries", "museums", "mountains", "deserts", "rivers", "oceans", "snow",
    "hurricanes", "the seasons", "the brain", "memory", "habits", "exercise", "yoga", "cooking pasta",
    "making tea", "chocolate", "cheese", "tomatoes", "cats", "dogs", "horses", "elephants", "owls",
    "butterflies", "ants", "mushrooms", "trees", "the desert camel", "robots", "3D printing",
    "virtual reality", "cloud computing", "databases", "open source software", "the Linux kernel",
    "email etiquette", "climate adaptation", "city parks", "public transport", "urban planning",
    "clean oceans", "plastic pollution", "electricity", "the telephone", "television", "radio",
    "video games", "board games", "camping", "hiking safety", "first aid", "the common cold",
    "vitamins", "the Silk Road", "the Vikings", "the Moon landing", "the Industrial Revolution",
]

TASKS = [
    "Explain {t} in simple terms.",
    "What is {t}?",
    "Give me three interesting facts about {t}.",
    "Write a short paragraph about {t}.",
    "Explain {t} to a ten-year-old.",
    "List five key points about {t}.",
    "What are the pros and cons of {t}?",
    "Why is {t} important?",
    "Write a short poem about {t}.",
    "Write a short story that involves {t}.",
    "Summarize the history of {t} in a few sentences.",
    "What are common misconceptions about {t}?",
    "How would you teach a beginner about {t}?",
    "Write a haiku about {t}.",
    "Describe {t} in three sentences.",
    "What questions do people often ask about {t}? Answer two of them.",
    "Give me a step-by-step guide related to {t}.",
    "Write a tweet about {t}.",
    "What is the most surprising thing about {t}?",
    "Compare {t} and {u}.",
    "How are {t} and {u} related?",
    "Write a short dialogue between two friends talking about {t}.",
    "Create a quiz with three questions about {t}, with answers.",
    "Write an email to a colleague recommending a book about {t}.",
    "What would the world look like without {t}?",
    "Give some tips for someone interested in {t}.",
    "Define {t} and give an example.",
    "Write a limerick about {t}.",
    "What are the main challenges related to {t}?",
    "Tell me a fun fact about {t} and explain why it is true.",
]

LANGUAGES = ["Python", "JavaScript", "C", "Rust", "Go", "Java", "SQL", "Bash"]
CODE_TASKS = [
    "Write a {lang} function that reverses a string.",
    "Write a {lang} function that checks whether a number is prime.",
    "Write a {lang} program that prints the first ten Fibonacci numbers.",
    "How do I read a file line by line in {lang}?",
    "Write a {lang} function that returns the largest element of a list.",
    "Explain what a for loop is in {lang}, with an example.",
    "Write a {lang} function that counts the vowels in a string.",
    "How do I sort a list of numbers in {lang}?",
    "Write a {lang} function that computes the factorial of n.",
    "What is a variable in {lang}? Show an example.",
    "Write a {lang} function that removes duplicates from a list.",
    "Show how to handle errors in {lang}.",
    "Write a {lang} function that checks if a word is a palindrome.",
    "Explain recursion with a {lang} example.",
    "Write a {lang} function that adds two matrices.",
]
SQL_LIKE = {"SQL": "Write an SQL query that finds the ten most expensive products in a products table."}

MATH_TASKS = [
    "What is {a} plus {b}?",
    "What is {a} times {b}?",
    "If I have {a} apples and give away {b}, how many are left?",
    "A train travels {a} km in {b} hours. What is its average speed?",
    "What is {a} percent of {b}?",
    "Solve for x: x + {a} = {b}.",
    "Is {a} an even or an odd number? Explain.",
]

FOLLOW_UPS = [
    "Can you make that shorter?",
    "Can you give me an example?",
    "Thanks! Can you explain it in more detail?",
    "Can you put that into a bulleted list?",
    "What is the most important part of what you said?",
    "Now explain it to a child.",
    "Can you rewrite it in a more formal tone?",
    "Why?",
]

SYSTEM_PROMPTS = [
    None,
    "You are a concise assistant. Answer briefly.",
    "You are a friendly teacher who explains things clearly.",
    "You are an expert programmer.",
]


def training_prompts(n: int, seed: int = 0) -> list[list[dict]]:
    """`n` distinct single-turn conversations (lists of chat messages), drawn reproducibly from the templates."""
    rng = random.Random(seed)
    seen: set[str] = set()
    conversations: list[list[dict]] = []
    while len(conversations) < n:
        kind = rng.random()
        if kind < 0.62:
            topic, other = rng.sample(TOPICS, 2)
            text = rng.choice(TASKS).format(t=topic, u=other)
        elif kind < 0.87:
            lang = rng.choice(LANGUAGES)
            text = SQL_LIKE[lang] if lang in SQL_LIKE and rng.random() < 0.5 else rng.choice(CODE_TASKS).format(lang=lang)
        else:
            text = rng.choice(MATH_TASKS).format(a=rng.randint(2, 500), b=rng.randint(2, 500))
        if text in seen:
            continue
        seen.add(text)
        system = rng.choice(SYSTEM_PROMPTS)
        messages = [{"role": "system", "content": system}] if system else []
        conversations.append(messages + [{"role": "user", "content": text}])
    return conversations


def follow_up(rng: random.Random) -> str:
    return rng.choice(FOLLOW_UPS)



# Written after the draft's training set was generated; used by `specdec bench` and every figure in the README.
EVAL_PROMPTS = [
    "Describe how a refrigerator keeps food cold.",
    "I am planning a weekend trip to the seaside. What should I pack?",
    "Write a Python class for a bank account with deposit and withdraw methods.",
    "Why do leaves change colour in autumn?",
    "Suggest a name for a bakery and explain your choice.",
    "What is the difference between weather and climate?",
    "Give me a simple recipe for vegetable soup.",
    "Explain what an API is, with an everyday analogy.",
    "Write a thank-you note to a neighbour who watered my plants.",
    "How does a microwave oven heat food?",
    "List some ways to reduce stress before an exam.",
    "What happens to a letter after I post it?",
]
