"""Prompt sets: templated chat prompts for training the draft, and hand-written held-out prompts for measuring.

The two never meet: training prompts come from the templates below, the measurement prompts were written
separately after the draft was trained, and a test checks that none of them is in the training set.
"""
from __future__ import annotations

import random

TOPICS = [
    # science and nature
    "photosynthesis", "black holes", "the water cycle", "volcanoes", "the human heart", "vaccines", "gravity",
    "quantum computing", "honey bees", "the Moon", "earthquakes", "rainbows", "tides", "DNA", "evolution",
    "the immune system", "the solar system", "Mars", "Jupiter", "comets", "the speed of light", "magnets",
    "batteries", "electricity", "sound waves", "friction", "atoms", "chemical reactions", "acids and bases",
    "the periodic table", "cells", "bacteria", "viruses", "fungi", "the nervous system", "the lungs",
    "the kidneys", "bones", "muscles", "the skin", "eyesight", "hearing", "taste", "dreams", "hormones",
    "genetics", "fossils", "plate tectonics", "glaciers", "caves", "clouds", "lightning", "tornadoes",
    "hurricanes", "the ozone layer", "the greenhouse effect", "ocean currents", "the carbon cycle",
    "food chains", "pollination", "migration of birds", "hibernation", "camouflage in animals", "coral reefs",
    "the Amazon rainforest", "deserts", "wetlands", "the Arctic", "Antarctica", "stars", "galaxies",
    "the Big Bang", "telescopes", "satellites", "the International Space Station", "rockets", "eclipses",
    "the northern lights", "meteors", "sunspots", "seasons", "snowflakes", "salt water", "rust", "soap",
    # animals and plants
    "penguins", "wolves", "cats", "dogs", "horses", "elephants", "owls", "butterflies", "ants", "mushrooms",
    "trees", "camels", "dolphins", "whales", "sharks", "octopuses", "bats", "frogs", "snakes", "spiders",
    "parrots", "crows", "bees and wasps", "tigers", "giraffes", "kangaroos", "pandas", "squirrels", "hedgehogs",
    "goldfish", "cacti", "sunflowers", "bamboo", "oak trees", "seaweed", "moss", "tulips", "house plants",
    # history and society
    "the French Revolution", "the Roman Empire", "ancient Egypt", "ancient Greece", "the Vikings",
    "the Silk Road", "the Moon landing", "the Industrial Revolution", "the Renaissance", "the printing press",
    "the Great Wall of China", "the Middle Ages", "castles", "knights", "pirates", "the Aztecs", "the Maya",
    "the Cold War", "the Berlin Wall", "the telegraph", "the steam engine", "the invention of paper",
    "the history of money", "the Olympic Games", "democracy", "elections", "human rights", "the United Nations",
    "taxes", "inflation", "the stock market", "interest rates", "supply and demand", "globalisation",
    "trade", "unemployment", "cities", "villages", "immigration", "languages", "writing systems", "maps",
    "calendars", "clocks", "the postal system", "newspapers", "libraries", "museums", "universities",
    # technology
    "machine learning", "artificial intelligence", "the internet", "smartphones", "social media",
    "cybersecurity", "password safety", "robots", "3D printing", "virtual reality", "cloud computing",
    "databases", "open source software", "the Linux kernel", "electric cars", "solar panels", "wind turbines",
    "nuclear power", "renewable energy", "search engines", "email", "web browsers", "computer viruses",
    "encryption", "Wi-Fi", "Bluetooth", "GPS", "semiconductors", "operating systems", "compilers",
    "version control", "spreadsheets", "video streaming", "online shopping", "digital cameras", "drones",
    "self-driving cars", "smart homes", "wearable fitness trackers", "e-books", "podcasts", "chatbots",
    "programming languages", "algorithms", "data privacy", "backups", "keyboards", "touch screens",
    # everyday life
    "coffee", "tea", "chocolate", "cheese", "bread", "rice", "pasta", "pizza", "breakfast", "spices",
    "vegetarian food", "fermentation", "food storage", "kitchen knives", "baking cakes", "barbecues",
    "sleep", "meditation", "exercise", "yoga", "running", "swimming", "cycling", "walking", "stretching",
    "drinking water", "vitamins", "the common cold", "first aid", "sunscreen", "posture", "headaches",
    "budgeting", "saving money", "credit cards", "renting a flat", "buying a car", "insurance", "debt",
    "time management", "habits", "motivation", "procrastination", "goal setting", "journaling", "focus",
    "public speaking", "job interviews", "writing a CV", "remote work", "teamwork", "leadership",
    "negotiation", "networking", "meetings", "feedback", "online learning", "homework", "note taking",
    "learning a language", "reading habits", "friendship", "family dinners", "weddings", "birthdays",
    "moving house", "decluttering", "laundry", "cleaning the bathroom", "houseplants care", "gardening",
    "composting", "recycling", "plastic pollution", "saving energy at home", "public transport", "bicycles",
    "airplanes", "trains", "road trips", "camping", "hiking safety", "travel insurance", "hotels",
    "packing light", "jet lag", "city parks", "urban planning", "bridges", "skyscrapers", "tunnels",
    # culture and hobbies
    "chess", "the piano", "the guitar", "jazz music", "classical music", "rock music", "opera", "dance",
    "Shakespeare", "poetry", "novels", "fairy tales", "comics", "photography", "painting", "drawing",
    "origami", "knitting", "pottery", "woodworking", "film making", "theatre", "board games", "video games",
    "football", "tennis", "basketball", "the marathon", "mountain climbing", "fishing", "bird watching",
    "stamp collecting", "magic tricks", "puzzles", "crosswords", "sudoku", "karaoke", "stand-up comedy",
]

TASKS = [
    "Explain {t} in simple terms.", "What is {t}?", "Give me three interesting facts about {t}.",
    "Write a short paragraph about {t}.", "Explain {t} to a ten-year-old.", "List five key points about {t}.",
    "What are the pros and cons of {t}?", "Why is {t} important?", "Write a short poem about {t}.",
    "Write a short story that involves {t}.", "Summarize the history of {t} in a few sentences.",
    "What are common misconceptions about {t}?", "How would you teach a beginner about {t}?",
    "Write a haiku about {t}.", "Describe {t} in three sentences.",
    "What questions do people often ask about {t}? Answer two of them.",
    "Give me a step-by-step guide related to {t}.", "Write a tweet about {t}.",
    "What is the most surprising thing about {t}?", "Compare {t} and {u}.", "How are {t} and {u} related?",
    "Write a short dialogue between two friends talking about {t}.",
    "Create a quiz with three questions about {t}, with answers.",
    "Write an email to a colleague recommending a book about {t}.",
    "What would the world look like without {t}?", "Give some tips for someone interested in {t}.",
    "Define {t} and give an example.", "Write a limerick about {t}.",
    "What are the main challenges related to {t}?", "Tell me a fun fact about {t} and explain why it is true.",
    "How does {t} work?", "Can you tell me about {t}?", "I don't understand {t}. Can you help?",
    "What should everyone know about {t}?", "Write a blog post introduction about {t}.",
    "Give me an analogy that explains {t}.", "What is the difference between {t} and {u}?",
    "Tell me something about {t} that most people don't know.", "How has {t} changed over time?",
    "What are the benefits of {t}?", "What are the risks of {t}?", "Write a product description inspired by {t}.",
    "Write a short speech about {t}.", "Give me a list of words related to {t}.",
    "Explain {t} using only short sentences.", "What careers are connected to {t}?",
    "Write a children's bedtime story about {t}.", "Write a riddle about {t} and give the answer.",
    "Make a study plan for learning about {t} in one week.", "What is the future of {t}?",
    "Why do people find {t} interesting?", "Write a news headline and a short article about {t}.",
    "Explain {t} as if you were a pirate.", "Write a motivational quote about {t}.",
    "I have a presentation about {t} tomorrow. What should I include?",
    "What books or resources would you suggest for learning about {t}?",
    "Give me an outline for an essay on {t}.", "Write a song chorus about {t}.",
    "How would you explain {t} to your grandmother?", "What are three myths about {t}?",
    "Describe a day in the life of someone who works with {t}.", "Is {t} good or bad? Explain both sides.",
    "Write a persuasive paragraph about why {t} matters.", "What can children learn from {t}?",
    "Summarise {t} in one sentence, then in one paragraph.", "What are some jokes about {t}?",
    "Write a diary entry from the point of view of someone discovering {t}.",
    "What are the most important words to know when talking about {t}?",
]

ACTIVITIES = [
    "boil an egg", "make pancakes", "brew good coffee at home", "cook rice without a rice cooker",
    "sharpen a kitchen knife", "clean a cast iron pan", "remove a coffee stain from a shirt", "iron a shirt",
    "fold a fitted sheet", "unclog a sink", "change a light bulb safely", "hang a picture on a wall",
    "fix a squeaky door", "paint a room", "assemble flat-pack furniture", "descale a kettle",
    "change a flat tyre", "jump-start a car", "check the oil in my car", "parallel park",
    "fix a bicycle puncture", "plan a road trip", "find cheap flights", "deal with jet lag",
    "learn to swim as an adult", "start running", "do a proper push-up", "improve my sleep",
    "drink more water", "stop snacking at night", "cook healthy meals on a budget", "meal prep for a week",
    "grow tomatoes on a balcony", "keep houseplants alive", "start a compost bin", "care for a new puppy",
    "train a cat to use a scratching post", "introduce two cats", "choose a good laptop", "speed up my computer",
    "back up my phone", "make a strong password", "spot a phishing email", "set up a home Wi-Fi network",
    "write a good CV", "prepare for a job interview", "ask for a raise", "give constructive feedback",
    "run an effective meeting", "say no politely", "make new friends in a new city", "apologise sincerely",
    "remember people's names", "learn vocabulary faster", "read more books", "take better notes",
    "study for a maths test", "memorise a speech", "overcome stage fright", "start a podcast",
    "take better photos with my phone", "start a journal", "save for a holiday", "make a monthly budget",
    "pay off a credit card", "negotiate the price of a car", "organise my wardrobe", "pack a suitcase",
    "plan a birthday party", "host a dinner party", "choose a gift for my father", "write a wedding toast",
    "stay calm in an argument", "build a daily routine", "wake up earlier", "stop procrastinating",
    "meditate for the first time", "learn to play chess", "tune a guitar", "start drawing",
    "knit a scarf", "bake sourdough bread", "make a paper airplane", "build a birdhouse",
    "teach a child to ride a bike", "help a friend who is sad", "prepare for a power cut",
    "keep my home cool in summer", "keep warm in winter without high bills", "reduce food waste",
    "choose a good watermelon", "store fresh herbs", "make a cup of tea properly", "cook a steak",
    "make a salad more filling", "write a short story", "come up with a business idea",
    "start learning to code", "learn Spanish in six months", "choose a university course",
]

WRITING = [
    "Write a birthday message for my {p}.", "Write a short apology to my {p} for missing their call.",
    "Write an invitation to a {e} for my friends.", "Write a polite email asking my {p} for a day off.",
    "Write a message congratulating my {p} on a new job.", "Write a get-well-soon card for my {p}.",
    "Write a short welcome speech for a {e}.", "Write a note to my {p} asking them to keep the noise down.",
    "Write a text message to my {p} to cancel our plans politely.", "Write a farewell message for my {p}.",
    "Write a short complaint to a shop about a broken {o}.", "Write an advert to sell my old {o}.",
    "Write a review of a {o} I bought last week.", "Write instructions for using a {o}.",
    "Write a short poem for my {p}'s retirement.", "Write a toast for a {e}.",
    "Write a reminder for my team about the {e} next week.",
    "Write a short letter to my future self.", "Write a motivational message for a friend running a race.",
    "Write a cover letter opening for a job as a {j}.", "Write a short bio for a {j}.",
    "Describe the ideal day of a {j}.", "What skills does a {j} need?", "How do I become a {j}?",
    "Write a job advert for a {j}.", "Suggest five names for a {b} and explain them.",
    "Write a slogan for a {b}.", "Write a short menu for a {b}.", "Give me a marketing plan for a small {b}.",
]
PEOPLE = ["mother", "father", "sister", "brother", "grandmother", "best friend", "manager", "teacher",
          "neighbour", "colleague", "landlord", "cousin", "partner", "team"]
EVENTS = ["barbecue", "birthday party", "book club meeting", "school reunion", "wedding", "picnic",
          "team lunch", "charity run", "housewarming party", "graduation", "game night", "retirement party"]
OBJECTS = ["kettle", "bicycle", "laptop", "lamp", "coffee machine", "umbrella", "backpack", "vacuum cleaner",
           "phone", "desk chair", "toaster", "pair of headphones", "sofa", "camera", "tent"]
JOBS = ["nurse", "software developer", "chef", "teacher", "pilot", "farmer", "electrician", "librarian",
        "graphic designer", "journalist", "firefighter", "accountant", "architect", "veterinarian",
        "data scientist", "plumber", "photographer", "translator", "gardener", "dentist"]
BUSINESSES = ["coffee shop", "bookshop", "bicycle repair shop", "flower shop", "pet grooming service",
              "food truck", "yoga studio", "tech start-up", "cleaning company", "ice cream parlour",
              "tutoring service", "second-hand clothes shop", "pizza restaurant", "hair salon"]

QUESTIONS = [
    "Why is the sky blue?", "Why do cats purr?", "Why do we yawn?", "Why is the sea salty?",
    "How do birds know where to fly in winter?", "Why do onions make us cry?", "How do airplanes stay in the air?",
    "Why do we have different time zones?", "How does a compass work?", "Why does bread go stale?",
    "How do vaccines train the immune system?", "Why do we get goosebumps?", "How do solar panels make electricity?",
    "Why does ice float?", "How do noise-cancelling headphones work?", "Why do we dream?",
    "How does a dishwasher clean dishes?", "Why do stars twinkle?", "How do bees make honey?",
    "Why is exercise good for the brain?", "How does a credit score work?", "Why do prices go up over time?",
    "How do touch screens know where I touch?", "Why does my phone battery get worse over time?",
    "How do elevators work?", "Why do some people snore?", "How do fish breathe underwater?",
    "How does a washing machine work?", "Why do we need sleep?", "How do plants know which way is up?",
    "Why do clocks go forward in spring?", "What makes a good friend?", "What is the best way to learn?",
    "Is it better to rent or to buy a home?", "Should I learn Python or JavaScript first?",
    "What should I cook for dinner tonight?", "What are some good habits to start this year?",
    "What is a healthy lunch I can take to work?", "What are some fun things to do on a rainy day?",
    "What are good questions to ask on a first date?", "How can I be more productive in the morning?",
    "What can I do when I feel bored?", "What are some easy plants for beginners?",
    "How much water should I drink a day?", "How can I make my small flat feel bigger?",
    "Can you recommend a few classic novels?", "What board games are good for a family?",
    "What is the meaning of life?", "Tell me a joke.", "Tell me a fun fact.", "Tell me a story.",
    "Can you help me plan my week?", "Give me a random interesting fact about history.",
    "What should I name my new goldfish?", "Give me an idea for a weekend project.",
    "Hi! How are you today?", "Who are you?", "What can you help me with?", "Hello, can you help me?",
    "I feel a bit tired today. Any advice?", "I am bored. Suggest something to do.",
    "I want to get fit but I have no time. What can I do?", "My friend is upset with me. What should I do?",
    "I have a job interview tomorrow and I am nervous.", "I can't decide what to study at university.",
    "I keep forgetting things. How can I improve my memory?", "My plants keep dying. What am I doing wrong?",
    "I want to start a small business. Where do I begin?", "I have guests coming tonight. What can I cook quickly?",
]

PERSONAS = ["a student", "a nurse", "a retired teacher", "a new parent", "a software engineer", "a small business owner",
            "a beginner cook", "an artist", "a football fan", "someone who just moved abroad"]
ADVICE = [
    "I am {who}. How can I save money each month?", "I am {who}. What hobby should I try?",
    "I am {who}. How can I manage stress better?", "I am {who}. How do I stay healthy with a busy schedule?",
    "I am {who}. Which books would you recommend?", "I am {who}. How can I improve my writing?",
    "As {who}, how should I plan my weekend?", "As {who}, what should I learn next?",
]

LANGUAGES = ["Python", "JavaScript", "TypeScript", "C", "C++", "Rust", "Go", "Java", "SQL", "Bash", "Ruby", "PHP"]
CODE_TASKS = [
    "Write a {lang} function that reverses a string.", "Write a {lang} function that checks whether a number is prime.",
    "Write a {lang} program that prints the first ten Fibonacci numbers.", "How do I read a file line by line in {lang}?",
    "Write a {lang} function that returns the largest element of a list.",
    "Explain what a for loop is in {lang}, with an example.", "Write a {lang} function that counts the vowels in a string.",
    "How do I sort a list of numbers in {lang}?", "Write a {lang} function that computes the factorial of n.",
    "What is a variable in {lang}? Show an example.", "Write a {lang} function that removes duplicates from a list.",
    "Show how to handle errors in {lang}.", "Write a {lang} function that checks if a word is a palindrome.",
    "Explain recursion with a {lang} example.", "Write a {lang} function that adds two matrices.",
    "Write a {lang} class that represents a {thing}.", "Write a {lang} function that converts Celsius to Fahrenheit.",
    "How do I make an HTTP request in {lang}?", "Write a {lang} function that merges two sorted lists.",
    "How do I parse JSON in {lang}?", "Write a {lang} function that finds the average of a list of numbers.",
    "Explain the difference between a list and a dictionary, with {lang} examples.",
    "Write a {lang} program that asks for the user's name and greets them.",
    "Write a {lang} function for binary search.", "How do I write unit tests in {lang}?",
    "Write a {lang} function that counts the words in a sentence.", "What are the basic data types in {lang}?",
    "Write a simple {lang} program that simulates rolling a die.", "How do I work with dates and times in {lang}?",
    "Write a {lang} function that validates an email address.", "Explain classes and objects using {lang}.",
    "Write a {lang} script that renames all files in a folder.", "What is a common mistake beginners make in {lang}?",
    "Write a {lang} function that returns the n-th prime number.", "Show me a {lang} example of a stack.",
    "How can I make my {lang} code faster?", "Write a {lang} function that flattens a nested list.",
    "Write a to-do list program in {lang}.", "Why is my {lang} loop running forever?",
]
THINGS = ["library book", "car", "student", "shopping cart", "rectangle", "playing card", "to-do item",
          "temperature sensor", "music playlist", "bank transfer", "recipe", "calendar event"]
SQL_LIKE = {"SQL": "Write an SQL query that finds the ten most expensive products in a products table."}

MATH_TASKS = [
    "What is {a} plus {b}?", "What is {a} times {b}?", "If I have {a} apples and give away {b}, how many are left?",
    "A train travels {a} km in {b} hours. What is its average speed?", "What is {a} percent of {b}?",
    "Solve for x: x + {a} = {b}.", "Is {a} an even or an odd number? Explain.", "What is {a} divided by {b}?",
    "A shirt costs {a} dollars and is {b} percent off. What is the new price?",
    "Convert {a} minutes into hours and minutes.", "What is the area of a rectangle {a} cm by {b} cm?",
    "If a recipe for 4 people needs {a} grams of flour, how much is needed for {b} people?",
    "I save {a} dollars a week. How long until I have {b} dollars?", "Round {a}.{b} to the nearest whole number.",
]

FOLLOW_UPS = [
    "Can you make that shorter?", "Can you give me an example?", "Thanks! Can you explain it in more detail?",
    "Can you put that into a bulleted list?", "What is the most important part of what you said?",
    "Now explain it to a child.", "Can you rewrite it in a more formal tone?", "Why?", "Thank you!",
    "Can you say more about the first point?", "Is that always true?", "What would you do in my place?",
    "Can you give me three more ideas?", "That's great. What should I do next?", "Can you summarise that?",
    "Make it funnier.", "Can you translate that into simple English?", "Are there any risks I should know about?",
    "How long would that take?", "What do experts say about this?", "Can you make it rhyme?",
    "Ok. And how much does it cost?", "I don't understand. Can you explain again?", "Great, thanks a lot!",
]

SYSTEM_PROMPTS = [
    None, None,
    "You are a concise assistant. Answer briefly.",
    "You are a friendly teacher who explains things clearly.",
    "You are an expert programmer.",
    "You are a helpful assistant.",
    "You are a cheerful assistant who loves to help.",
    "You are a careful assistant who answers step by step.",
]


def _topic_prompt(rng: random.Random) -> str:
    topic, other = rng.sample(TOPICS, 2)
    return rng.choice(TASKS).format(t=topic, u=other)


def _everyday_prompt(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        frame = rng.choice(["How do I {a}?", "How can I {a}?", "What is the best way to {a}?",
                            "Can you teach me how to {a}?", "Give me tips to {a}.", "I want to {a}. Where do I start?",
                            "What mistakes should I avoid when I try to {a}?", "Explain step by step how to {a}."])
        return frame.format(a=rng.choice(ACTIVITIES))
    if kind < 0.65:
        return rng.choice(WRITING).format(p=rng.choice(PEOPLE), e=rng.choice(EVENTS), o=rng.choice(OBJECTS),
                                          j=rng.choice(JOBS), b=rng.choice(BUSINESSES))
    if kind < 0.85:
        return rng.choice(QUESTIONS)
    return rng.choice(ADVICE).format(who=rng.choice(PERSONAS))


def _code_prompt(rng: random.Random) -> str:
    lang = rng.choice(LANGUAGES)
    if lang in SQL_LIKE and rng.random() < 0.3:
        return SQL_LIKE[lang]
    return rng.choice(CODE_TASKS).format(lang=lang, thing=rng.choice(THINGS))


def _math_prompt(rng: random.Random) -> str:
    return rng.choice(MATH_TASKS).format(a=rng.randint(2, 500), b=rng.randint(2, 500))


# Shares of each kind of prompt: everyday chat first, as users of a chat app write it.
PROMPT_KINDS = [(0.40, _topic_prompt), (0.35, _everyday_prompt), (0.17, _code_prompt), (0.08, _math_prompt)]


def training_prompts(n: int, seed: int = 0) -> list[list[dict]]:
    """`n` distinct single-turn conversations (lists of chat messages), drawn reproducibly from the templates."""
    rng = random.Random(seed)
    seen: set[str] = set()
    conversations: list[list[dict]] = []
    shares, makers = zip(*PROMPT_KINDS)
    while len(conversations) < n:
        text = rng.choices(makers, weights=shares)[0](rng)
        if text in seen:
            continue
        seen.add(text)
        system = rng.choice(SYSTEM_PROMPTS)
        messages = [{"role": "system", "content": system}] if system else []
        conversations.append(messages + [{"role": "user", "content": text}])
    return conversations


def follow_up(rng: random.Random) -> str:
    return rng.choice(FOLLOW_UPS)


# Written after the current draft's training prompts were fixed, and never shown to training; used by
# `specdec bench` and every figure in the README.
EVAL_PROMPTS = [
    "My sourdough starter smells like nail polish. Is it still safe to use?",
    "Explain how the gears on a bicycle make pedalling uphill easier.",
    "Write a JavaScript function that shuffles an array.",
    "Why do we see lightning before we hear thunder?",
    "Give me three ideas for a rainy Sunday with two young children.",
    "Write a short message inviting my coworkers to a farewell lunch on Friday.",
    "What are some good stretches after a long day at a desk?",
    "Explain what a hash table is and when to use one.",
    "Describe the plot of a mystery novel set on a night train, in one paragraph.",
    "How should I prepare for my first 10 km race?",
    "How does light pollution affect animals that live in cities?",
    "Write a four-line poem about an old lighthouse.",
]
