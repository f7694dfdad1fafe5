"""A fixed corpus with known answers: ten documents of a fictional company, each several paragraphs long, and one
question per document whose answer sits in exactly one of its paragraphs. The questions are worded differently from
the passages that answer them, so finding them takes meaning, not shared words alone."""

from __future__ import annotations

DOCUMENTS: list[dict[str, str]] = [
    {
        "title": "Employee handbook",
        "text": (
            "Welcome to Northwind. This handbook describes how we work together and what you can expect from us.\n\n"
            "Working hours are flexible between 7:00 and 19:00, with core hours from 10:00 to 15:00 when everyone "
            "is expected to be reachable.\n\n"
            "Annual leave: every full-time employee receives 27 days of paid holiday per calendar year, plus public "
            "holidays. Unused days can be carried over until the end of March.\n\n"
            "Sick leave must be reported to your manager before 9:00 on the first day of absence."
        ),
        "question": "How much vacation time do full-time staff get each year?",
        "answer": "27 days of paid holiday",
    },
    {
        "title": "Travel and expenses policy",
        "text": (
            "This policy applies to every business trip booked on behalf of Northwind.\n\n"
            "Flights under six hours are booked in economy class; longer flights may be booked in premium economy "
            "with the approval of a director.\n\n"
            "Meals while travelling are reimbursed up to 55 euros per day on presentation of receipts. Alcohol is "
            "never reimbursed.\n\n"
            "Expense reports must be submitted within 30 days of returning from the trip."
        ),
        "question": "What is the daily limit for food costs on a business trip?",
        "answer": "55 euros per day",
    },
    {
        "title": "IT security guidelines",
        "text": (
            "Security is everyone's job. These guidelines apply to all company devices and accounts.\n\n"
            "Passwords must be at least 14 characters long and must be changed immediately if you suspect they "
            "have been exposed. Use the company password manager.\n\n"
            "Lost or stolen laptops must be reported to the security desk at extension 4400 within one hour, so the "
            "device can be wiped remotely.\n\n"
            "Personal USB sticks may not be connected to company machines."
        ),
        "question": "Who do I call if my work computer gets stolen?",
        "answer": "security desk at extension 4400",
    },
    {
        "title": "Customer refund policy",
        "text": (
            "We want customers to be happy with what they buy from Northwind.\n\n"
            "Hardware can be returned unopened within 14 days for a full refund. Opened hardware is refunded at 80 "
            "percent of its price.\n\n"
            "Annual software subscriptions can be cancelled within 30 days of purchase for a full refund; after that "
            "the remaining months are refunded pro rata.\n\n"
            "Refunds are paid to the original payment method within five business days."
        ),
        "question": "Can a customer get their money back for a yearly software plan after a few weeks?",
        "answer": "cancelled within 30 days of purchase",
    },
    {
        "title": "Office guide Lisbon",
        "text": (
            "The Lisbon office is on the fourth floor of Rua Augusta 120, five minutes from the Baixa-Chiado metro "
            "station.\n\n"
            "The building opens at 7:30 and closes at 20:00; badges work outside these hours only for the server "
            "room team.\n\n"
            "Visitor parking is available in the underground garage on level -2; ask reception for a ticket.\n\n"
            "Lunch is served in the canteen on the second floor from 12:00 to 14:30."
        ),
        "question": "Where can guests leave their car when visiting the Lisbon site?",
        "answer": "underground garage on level -2",
    },
    {
        "title": "Quarterly report Q3",
        "text": (
            "Northwind closed the third quarter ahead of plan.\n\n"
            "Revenue reached 48.2 million euros, an increase of 12 percent compared with the same quarter last year, "
            "driven by subscription growth in Southern Europe.\n\n"
            "Operating costs rose by 5 percent, mainly because of new hires in engineering.\n\n"
            "The company ended the quarter with 412 employees across four offices."
        ),
        "question": "How much did sales grow in the third quarter?",
        "answer": "increase of 12 percent",
    },
    {
        "title": "Onboarding checklist",
        "text": (
            "Your first week at Northwind is about meeting people and getting set up.\n\n"
            "On day one, collect your laptop from the IT desk and sign the equipment form.\n\n"
            "Every new employee is paired with a buddy from another team for their first 90 days; your buddy is "
            "your first stop for any question.\n\n"
            "Complete the mandatory security training before the end of your second week."
        ),
        "question": "Who helps newcomers during their first three months?",
        "answer": "paired with a buddy from another team",
    },
    {
        "title": "Parental leave policy",
        "text": (
            "Northwind supports parents at every stage.\n\n"
            "Birth mothers receive 20 weeks of fully paid maternity leave.\n\n"
            "Partners and adoptive parents receive 10 weeks of fully paid leave, to be taken within the first year "
            "after the birth or adoption.\n\n"
            "Parents can return part-time for up to six months after their leave."
        ),
        "question": "How long can a father stay home with pay after his child is born?",
        "answer": "10 weeks of fully paid leave",
    },
    {
        "title": "Product roadmap 2026",
        "text": (
            "The roadmap lists what product teams plan to ship next year.\n\n"
            "The mobile app gets offline mode in the spring release, so field technicians can work without a "
            "connection.\n\n"
            "Single sign-on with SAML will be available to enterprise customers from September 2026.\n\n"
            "The legacy reporting module will be retired at the end of 2026."
        ),
        "question": "When will enterprise clients be able to log in through their identity provider?",
        "answer": "from September 2026",
    },
    {
        "title": "Code review guidelines",
        "text": (
            "Code review keeps our codebase healthy and spreads knowledge across teams.\n\n"
            "Every change needs approval from at least two reviewers, one of whom must own the code being changed.\n\n"
            "Reviews should be answered within one business day; if you cannot, hand the review to a colleague.\n\n"
            "Keep pull requests under 400 changed lines where possible."
        ),
        "question": "How many people must sign off on a pull request before it is merged?",
        "answer": "at least two reviewers",
    },
]
